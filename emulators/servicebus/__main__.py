"""`python -m emulators.servicebus --config PATH [--host 127.0.0.1] [--port 5672] [--data-dir DIR]`.

Loads the emulator-format config (a bad one exits with status 2 and the field's name), restores stored messages,
listens on loopback and serves until SIGINT or SIGTERM, then closes every connection and the store cleanly.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from proton.reactor import ApplicationEvent, Container, EventInjector

from emulators.servicebus import proton_io
from emulators.servicebus.broker import Broker
from emulators.servicebus.config import load_config
from emulators.servicebus.errors import ConfigError, ListenError
from emulators.servicebus.namespace import Namespace
from emulators.servicebus.status import COUNTS_EVENT, CountsRequest, StatusServer
from emulators.servicebus.store import open_store

log = logging.getLogger("emulators.servicebus")  # not __name__: run with -m, that would be "__main__"

EXIT_CONFIG = 2
EXIT_LISTEN = 3
SHUTDOWN_EVENT = "broker_shutdown"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m emulators.servicebus", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="emulator-format Config.json")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5672, help="AMQP port (default 5672)")
    parser.add_argument("--data-dir", type=Path, help="keep messages in SQLite here (default: memory only)")
    parser.add_argument(
        "--auto-create-queues",
        action="store_true",
        help="stand-in extension: create unknown queues with default properties on first use",
    )
    parser.add_argument(
        "--locked-counts-as-active",
        choices=["true", "false"],
        help="count a peek-locked, unsettled message as active (default true, as Service Bus reports it; "
        "config: StandIn.LockedCountsAsActive)",
    )
    parser.add_argument("--status-port", type=int, help="serve GET /counts (JSON) on this loopback port")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser.parse_args(argv)


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # proton logs every accept at info and a vanished client's broken pipe at error; the broker logs both
    # conditions itself (one line per connection, transport errors with their AMQP condition).
    proton_log = logging.getLogger("proton")
    proton_log.setLevel(max(logging.WARNING, logging.getLevelName(level)))
    proton_log.addFilter(_drop_socket_noise)


def _drop_socket_noise(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(("Couldn't send", "Couldn't recv"))


def check_loopback(host: str) -> None:
    """The stand-in has no TLS and a published key: it must never be reachable from another machine."""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ConfigError(f"--host: {host!r} is not a loopback address; the stand-in listens on loopback only")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    try:
        check_loopback(args.host)
        config = load_config(args.config)
        store = open_store(args.data_dir)
    except ConfigError as e:
        print(f"servicebus stand-in: config error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        namespace = Namespace(config.name, config.queues, store, auto_create=args.auto_create_queues)
        namespace.restore(store.load())
        locked_counts_as_active = (
            args.locked_counts_as_active == "true"
            if args.locked_counts_as_active is not None
            else config.locked_counts_as_active is not False
        )
        broker = Broker(namespace, store, locked_counts_as_active=locked_counts_as_active)
        serve(broker, args.host, args.port, args.auto_create_queues, args.status_port)
    except ListenError as e:
        log.error("%s", e)
        return EXIT_LISTEN
    finally:
        store.close()
    log.info("stopped")
    return 0


def serve(broker: Broker, host: str, port: int, auto_create: bool, status_port: int | None = None) -> None:
    proton_io.install()
    container = Container(broker)
    try:
        acceptor = proton_io.listen_on(container, host, port)
    except OSError as e:
        raise ListenError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    injector = EventInjector()
    container.selectable(injector)

    status: StatusServer | None = None
    if status_port is not None:
        try:
            status = StatusServer(host, status_port, lambda request: injector.trigger(_counts_event(request)))
        except OSError as e:
            acceptor.close()
            raise ListenError(f"cannot listen on {host}:{status_port} (--status-port): {e.strerror or e}") from e
        status.start()
        log.info(
            "runtime counts at http://%s:%d/counts (locked counts as active: %s)",
            host,
            status_port,
            broker.locked_counts_as_active,
        )

    def close_listeners() -> None:
        acceptor.close()
        injector.close()
        if status is not None:
            status.stop()

    broker.close_listeners = close_listeners
    _on_signals(lambda: injector.trigger(ApplicationEvent(SHUTDOWN_EVENT)))
    queues = ", ".join(sorted(q.name for q in broker.namespace.queues() if not q.is_dead_letter_queue)) or "(none)"
    log.info(
        "listening on %s:%d; namespace %s; queues: %s%s",
        host,
        port,
        broker.namespace.name,
        queues,
        "; unknown queues are auto-created" if auto_create else "",
    )
    container.run()


def _counts_event(request: CountsRequest) -> ApplicationEvent:
    return ApplicationEvent(COUNTS_EVENT, subject=request)


def _on_signals(action: Callable[[], None]) -> None:
    def handle(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s", signal.Signals(signum).name)
        action()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)


if __name__ == "__main__":
    sys.exit(main())
