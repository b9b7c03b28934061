"""queue-drain's app package, in layers that follow a batch's path (the contracts in pyproject.toml hold them):

    api, router, cli   the HTTP face, the trigger events' router, the command line
    runtime            the composition root: settings and services, wired once per event loop
    ops                status, batch list, poison replay, the operator's page
    intake             a batch's way in: decode, chunk, store, commit, ring the doorbell
    watch              the look chain and the timer: nothing lost
    engine             the drain engine
    services           the ports everything works through
    bus, store         Service Bus and Azure Storage behind adapters
    batch              what a batch is made of, as data (pure)
    handlers           the user's chunk handler, and the examples
    telemetry, core    spans and metrics; settings, errors, names, pure rules

Each layer imports only the layers below it; `docs/design.md` says why.
"""
