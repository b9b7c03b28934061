"""A small AMQP 1.0 broker that the unmodified azure-servicebus SDK can use in place of Service Bus (dev only)."""
