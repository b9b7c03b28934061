"""`python -m emulators.functions [--app-dir .] [--port 7071]`: run function_app.py like `func start`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from emulators.functions import config, indexing, keys
from emulators.functions.console import configure_logging, function_listing
from emulators.functions.easyauth import EasyAuth
from emulators.functions.errors import HostError
from emulators.functions.runtime import LOOPBACK, Host, plan_functions
from emulators.functions.timers import utc_now

log = logging.getLogger("emulators.functions")

DEFAULT_PORT = 7071
DEFAULT_GRACE_S = 20.0
FORCE_AFTER_S = 1.0
AUTH_NOTICE = (
    "Auth levels (function, admin) are not enforced by the local host: no keys are needed, as with func start. "
    "Set AzureWebJobsSecretStorageType=files to check function keys."
)
KEYS_NOTICE = (
    "Function keys are checked (AzureWebJobsSecretStorageType=files, secrets in %s): function-level routes need "
    "a function key, a host key or the master key (x-functions-key or ?code=), admin-level ones the master key"
)
EASY_AUTH_NOTICE = (
    "App Service Authentication is emulated (TENANT_FROM=principal): every route but openapi.json needs "
    "Authorization: Bearer <token> (python -m devstack token TENANT [--role operator]); a request without a valid "
    "one gets 401"
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m emulators.functions", description=__doc__)
    parser.add_argument("--app-dir", type=Path, default=Path("."), help="folder with function_app.py and host.json")
    parser.add_argument("--port", "-p", type=int, default=None, help="HTTP port (default: Host.LocalHttpPort or 7071)")
    parser.add_argument(
        "--grace-period", type=float, default=DEFAULT_GRACE_S, help="seconds to wait for in-flight work at shutdown"
    )
    return parser.parse_args(argv)


def local_http_port(app_dir: Path) -> int:
    path = app_dir / "local.settings.json"
    if not path.exists():
        return DEFAULT_PORT
    host_section = config.read_json(path, "local.settings.json").get("Host") or {}
    return int(host_section.get("LocalHttpPort") or DEFAULT_PORT)


def prepare(app_dir: Path, port: int | None, grace_s: float) -> Host:
    """Settings into the environment, host.json read, the app imported and indexed."""
    environ = config.process_environ()
    skipped = config.apply_values(config.load_local_values(app_dir), environ)
    for key in skipped:
        log.warning("Skipping '%s' from local.settings.json as it's already defined in current environment", key)
    options = config.load_host_options(app_dir, environ)
    settings = dict(environ)
    functions, failures = indexing.load(app_dir, settings)
    plan = plan_functions(functions, failures, options, utc_now())
    configured_keys = keys.load_keys(environ, [route.spec.name for route in plan.http])
    return Host(
        plan=plan,
        options=options,
        settings=settings,
        host_id=config.host_id(app_dir, environ),
        port=port or local_http_port(app_dir),
        body_limit_bytes=config.body_limit_bytes(environ),
        grace_s=grace_s,
        keys=configured_keys,
        loop_warn_ms=config.loop_warn_ms(environ),
        easy_auth=EasyAuth.from_environ(environ),
    )


def announce(host: Host) -> None:
    base_url = f"http://{LOOPBACK}:{host.port}"
    plan = host.plan
    print(
        function_listing(base_url, host.options.route_prefix, plan.http, plan.timers, plan.service_bus, plan.failures)
    )
    if plan.http and host.keys is None:
        log.info(AUTH_NOTICE)
    elif plan.http and host.keys is not None:
        log.info(KEYS_NOTICE, host.keys.folder)
    if plan.http and host.easy_auth is not None:
        log.info(EASY_AUTH_NOTICE)
    timeout = host.options.function_timeout_s
    log.info("functionTimeout: %s", config.format_timespan(timeout) if timeout is not None else "unbounded")


async def serve(host: Host) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()

    first_signal_at: list[float] = []

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if not first_signal_at:
            first_signal_at.append(loop.time())
            log.info("%s received: shutting down", name)
            stopping.set()
        elif loop.time() - first_signal_at[0] > FORCE_AFTER_S:
            # A second Ctrl+C, not the copy a terminal or `timeout` delivers to the whole group at once.
            log.warning("Second %s: exiting without waiting for in-flight work", name)
            os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    await host.run(stopping, on_started=lambda: announce(host))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging()
    app_dir = args.app_dir.resolve()
    try:
        os.chdir(app_dir)  # the worker runs in the app's folder, so relative paths work the same
        host = prepare(app_dir, args.port, args.grace_period)
        asyncio.run(serve(host))
        # The real worker process simply ends here; the app's SDK clients (which no Functions app can close,
        # there being no shutdown hook) would otherwise fill the console with "Unclosed client session".
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    except HostError as e:
        log.error("The host could not start: %s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
