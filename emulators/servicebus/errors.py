"""The stand-in's error tree; each AMQP-facing error carries the condition the SDK maps to its own exception."""

from __future__ import annotations


class ServiceBusStandInError(Exception):
    """Base of every error the stand-in raises on purpose."""


class ConfigError(ServiceBusStandInError):
    """Raised when the config file is unreadable or a field is invalid; the message names the field."""


class ListenError(ServiceBusStandInError):
    """Raised when the broker cannot listen on its address (the port is taken, or the address is not local)."""


class AmqpError(ServiceBusStandInError):
    """Raised when a client request must fail with an AMQP error condition (and a management status code)."""

    condition = "amqp:internal-error"
    status_code = 500

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class EntityNotFoundError(AmqpError):
    """Raised when a client addresses a queue that is neither configured nor auto-created."""

    condition = "amqp:not-found"
    status_code = 404


class UnauthorizedError(AmqpError):
    """Raised when a token is invalid, expired, or missing for the addressed entity."""

    condition = "amqp:unauthorized-access"
    status_code = 401


class MessageLockLostError(AmqpError):
    """Raised when a lock token is unknown, already settled, or its lock has expired."""

    condition = "com.microsoft:message-lock-lost"
    status_code = 410


class MessageNotFoundError(AmqpError):
    """Raised when a sequence number names no deferred (or scheduled) message."""

    condition = "com.microsoft:message-not-found"
    status_code = 404


class MessageSizeExceededError(AmqpError):
    """Raised when a message (or batch) is larger than the entity's maximum message size."""

    condition = "amqp:link:message-size-exceeded"
    status_code = 413


class BadRequestError(AmqpError):
    """Raised when a management request is malformed or names an unknown operation."""

    condition = "com.microsoft:argument-error"
    status_code = 400


class NotAllowedError(AmqpError):
    """Raised when an operation is valid AMQP but not allowed on this entity (e.g. sending to a dead-letter queue)."""

    condition = "amqp:not-allowed"
    status_code = 403


class SessionsNotSupportedError(NotAllowedError):
    """Raised when a session receiver attaches to a queue that does not require sessions (none here does)."""
