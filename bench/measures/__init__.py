"""The measurements: one package per benchmark, each owning its run (`run`) and its BENCHMARKS.md section
(`section`); `bench.report` lists the sections."""
