"""`python -m queue_drain_client`: the `queue-drain` command."""

import sys

from queue_drain_client.cli import main

sys.exit(main())
