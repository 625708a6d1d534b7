"""Payload encryption: what an actor marks secret is sealed before it leaves the producer.

An actor declared ``encrypt=True`` has its whole argument list sealed (into the ``sealed`` message
option; ``args`` and ``kwargs`` travel empty); ``secret_fields=["card_number"]`` seals only those
keyword arguments or fields of its payload. A sealed value is ``{"$sealed": "<Fernet token>"}``:
authenticated encryption (AES-128-CBC + HMAC-SHA256) with the ``[encryption] keys`` key ring, the
first key encrypting, all of them decrypting, so keys rotate without a flag day. An encrypting actor's
result is sealed too before it is stored in the run store or passed to the next step. Workers open
sealed values just before the actor runs; retries and dead letters keep the sealed form, so nothing
secret is readable in RabbitMQ, Redis or the logs. A token that does not authenticate (tampered, or
sealed with a key no longer in the ring) is a dead letter with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import dramatiq
import orjson

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

from pipelines import options as opt
from pipelines.errors import InvalidActorOption, PipelinesError

#: The key of a sealed value.
SEALED_KEY = "$sealed"


class Unsealable(PipelinesError):
    """A sealed value does not authenticate: tampered with, or sealed with a key not in the ring."""


def encrypts(actor: dramatiq.Actor[Any, Any]) -> bool:
    """Whether the actor seals anything."""
    return bool(actor.options.get(opt.ENCRYPT) or actor.options.get(opt.SECRET_FIELDS))


class Sealer:
    """Seals and opens values with the configured key ring."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._fernet: MultiFernet | None = None
        if keys:  # cryptography costs a worker about 8 MB: loaded only where keys are configured
            from cryptography.fernet import Fernet, MultiFernet

            self._fernet = MultiFernet([Fernet(key.encode()) for key in keys])

    def check_declaration(self, actor: dramatiq.Actor[Any, Any]) -> None:
        """Refuse an encrypting actor without keys, or malformed secret fields.

        Raises:
            InvalidActorOption: Naming the actor and the fix.
        """
        fields = actor.options.get(opt.SECRET_FIELDS, ())
        if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
            raise InvalidActorOption(
                f"Actor {actor.actor_name!r}: secret_fields={fields!r} must be a list of field names."
            )
        if encrypts(actor) and self._fernet is None:
            raise InvalidActorOption(
                f"Actor {actor.actor_name!r} encrypts its payload, but [encryption] keys is empty: set "
                "PIPELINES_ENCRYPTION__KEYS to a list of Fernet keys (see config.toml)."
            )

    def seal(self, value: Any) -> dict[str, str]:
        """``value`` (JSON-able) as a sealed value."""
        assert self._fernet is not None
        return {SEALED_KEY: self._fernet.encrypt(orjson.dumps(value)).decode()}

    def open(self, value: Any) -> Any:
        """``value`` with every sealed value in it (at any depth) opened.

        Raises:
            Unsealable: A sealed value does not authenticate.
        """
        if isinstance(value, dict):
            if len(value) == 1 and SEALED_KEY in value:
                return self.open(self._decrypt(value[SEALED_KEY]))
            return {key: self.open(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.open(item) for item in value)
        return value

    def _decrypt(self, token: Any) -> Any:
        if self._fernet is None:
            raise Unsealable("A sealed value arrived, but [encryption] keys is empty.")
        from cryptography.fernet import InvalidToken

        try:
            return orjson.loads(self._fernet.decrypt(str(token).encode()))
        except (InvalidToken, orjson.JSONDecodeError):
            raise Unsealable(
                "A sealed value does not authenticate: it was tampered with, or sealed with a key that is no "
                "longer in [encryption] keys."
            ) from None

    def seal_message(self, actor: dramatiq.Actor[Any, Any], message: dramatiq.Message[Any]) -> dramatiq.Message[Any]:
        """The message with what ``actor`` marks secret sealed (unchanged when it seals nothing)."""
        if actor.options.get(opt.ENCRYPT):
            sealed = self.seal({"args": list(message.args), "kwargs": message.kwargs})[SEALED_KEY]
            return message.copy(args=(), kwargs={}, options={opt.SEALED: sealed})
        if not actor.options.get(opt.SECRET_FIELDS):
            return message
        args, kwargs = self.seal_arguments(actor, message.args, message.kwargs)
        return message.copy(args=args, kwargs=kwargs)

    def seal_arguments(
        self, actor: dramatiq.Actor[Any, Any], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Arguments bound to ``actor`` with what it marks secret sealed in place: every argument of an
        encrypting actor, the secret fields of the others. A run's plan keeps its later steps' bound
        arguments in the run store this way; the message that runs the step is sealed as usual, and the
        worker opens both."""
        if actor.options.get(opt.ENCRYPT):
            return tuple(a if _is_sealed(a) else self.seal(a) for a in args), {
                k: v if _is_sealed(v) else self.seal(v) for k, v in kwargs.items()
            }
        fields: Sequence[str] = actor.options.get(opt.SECRET_FIELDS, ())
        if not fields:
            return tuple(args), kwargs
        return tuple(self._seal_fields(a, fields) if isinstance(a, dict) else a for a in args), self._seal_fields(
            kwargs, fields
        )

    def _seal_fields(self, values: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
        return {k: self.seal(v) if k in fields and not _is_sealed(v) else v for k, v in values.items()}

    def open_message(self, message: dramatiq.broker.MessageProxy) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments the actor runs with: the sealed option and every sealed value opened.

        Raises:
            Unsealable: Something sealed does not authenticate.
        """
        sealed = message.options.get(opt.SEALED)
        if sealed is not None:
            whole = self._decrypt(sealed)
            return tuple(self.open(whole["args"])), self.open(whole["kwargs"])
        return tuple(self.open(list(message.args))), self.open(message.kwargs)


def _is_sealed(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and SEALED_KEY in value


def has_sealed(value: Any) -> bool:
    """Whether ``value`` contains a sealed value at any depth (cheap check before opening)."""
    if isinstance(value, dict):
        return _is_sealed(value) or any(has_sealed(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_sealed(v) for v in value)
    return False
