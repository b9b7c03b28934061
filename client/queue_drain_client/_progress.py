"""The progress bar of `wait(progress=True)`: rich's, when rich is installed (`queue-drain-client[progress]`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType

from queue_drain_client.types import BatchStatus

try:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
except ImportError:  # an optional extra: the client depends on httpx only
    Progress = None  # type: ignore[assignment,misc]


class Bar:
    """Items settled of the batch's total, and its status."""

    def __init__(self, batch_id: str) -> None:
        if Progress is None:
            raise RuntimeError("wait(progress=True) needs rich: pip install 'queue-drain-client[progress]'")
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=False
        )
        self._task = self._progress.add_task(f"batch {batch_id[:8]}", total=None)

    def __enter__(self) -> Bar:
        self._progress.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._progress.stop()

    def show(self, status: BatchStatus) -> None:
        items = status["items"]
        done = int(items["succeeded"]) + int(items["failed"])
        self._progress.update(
            self._task, total=int(items["total"]), completed=done, description=f"{status['status']:<24}"
        )


@contextmanager
def shown(batch_id: str, progress: bool) -> Iterator[Callable[[BatchStatus], None] | None]:
    """The bar's `show` while the block runs, or None without `progress`."""
    if not progress:
        yield None
        return
    with Bar(batch_id) as bar:
        yield bar.show
