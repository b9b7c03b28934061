"""Throughput of the stand-in with the real SDK: messages sent, received and completed per second.

    python -m emulators.servicebus.bench [--messages 5000] [--batch 100] [--prefetch 100] [--durable]
    python -m emulators.servicebus.bench --connection-string "Endpoint=sb://localhost:5672;..." --queue NAME

Without a connection string it starts its own stand-in (memory only, or SQLite with --durable) on a free port.
One sender thread sends batches while one peek-lock receiver receives and completes every message; the figure
is messages divided by the time from the first send to the last completion.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from devstack.broker import broker, connection_string, write_config
from devstack.procs import free_port

BENCH_QUEUE = "bench"


@dataclass(frozen=True)
class Result:
    messages: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.messages / self.seconds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m emulators.servicebus.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=100, help="messages per send and per receive call")
    parser.add_argument("--prefetch", type=int, default=100)
    parser.add_argument("--body-bytes", type=int, default=200)
    parser.add_argument("--durable", action="store_true", help="run the stand-in with --data-dir (SQLite)")
    parser.add_argument("--connection-string", help="measure an already running stand-in instead")
    parser.add_argument("--queue", default=BENCH_QUEUE)
    return parser.parse_args(argv)


@contextmanager
def stand_in(durable: bool) -> Iterator[str]:
    """A stand-in of our own on a free port; yields its connection string."""
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        root = Path(tmp)
        port = free_port()
        config = write_config(root / "config.json", {BENCH_QUEUE: {"LockDuration": "PT1M"}})
        process = broker(config, port, root / "broker.log", data_dir=root / "data" if durable else None)
        process.start(timeout_s=30)
        try:
            yield connection_string(port)
        finally:
            process.stop()


def run(conn_str: str, queue: str, messages: int, batch: int, prefetch: int, body_bytes: int) -> Result:
    body = b"b" * body_bytes
    done = threading.Event()
    completed = 0
    with (
        ServiceBusClient.from_connection_string(conn_str) as client,
        client.get_queue_sender(queue) as sender,
        client.get_queue_receiver(queue, prefetch_count=prefetch) as receiver,
    ):

        def receive_all() -> None:
            nonlocal completed
            while completed < messages:
                for message in receiver.receive_messages(max_message_count=batch, max_wait_time=5):
                    receiver.complete_message(message)
                    completed += 1
            done.set()

        consumer = threading.Thread(target=receive_all, daemon=True)
        started = time.perf_counter()
        consumer.start()
        for first in range(0, messages, batch):
            sender.send_messages([ServiceBusMessage(body) for _ in range(min(batch, messages - first))])
        if not done.wait(timeout=max(60.0, messages / 50)):
            raise SystemExit(f"only {completed} of {messages} messages were completed in time")
        return Result(messages, time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.connection_string:
        result = run(args.connection_string, args.queue, args.messages, args.batch, args.prefetch, args.body_bytes)
        store = "as configured"
    else:
        with stand_in(args.durable) as conn_str:
            result = run(conn_str, BENCH_QUEUE, args.messages, args.batch, args.prefetch, args.body_bytes)
        store = "SQLite" if args.durable else "memory"
    print(
        f"{result.messages} messages of {args.body_bytes} B sent, received and completed in {result.seconds:.2f} s: "
        f"{result.per_second:.0f} messages/s (send batch {args.batch}, prefetch {args.prefetch}, store {store})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
