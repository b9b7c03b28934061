"""Microsoft's own azure-servicebus queue tests run against the stand-in (`make conformance-servicebus`)."""
