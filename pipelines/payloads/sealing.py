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

A sealed value opens only where it was sealed for (:class:`SealedFor`, inside the encrypted text): an
argument of one actor, in one field (a keyword argument, a field of a payload, ``args[i]`` or ``*`` for
the whole argument list), or anything of one run (an encrypting step's result, which its run's later
steps and its caller read). A token copied elsewhere — another actor's argument, another field, another
run — does not open: it is refused as a message that does not authenticate, and nothing is decrypted
for the actor that received it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dramatiq
import orjson

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

from pipelines import options as opt
from pipelines.errors import InvalidActorOption, PipelinesError

#: The key of a sealed value.
SEALED_KEY = "$sealed"
#: In a sealed value's plain text: where it may be opened, and the value itself.
_FOR, _VALUE = "$for", "$value"
#: The field of an encrypting actor's whole argument list (the ``sealed`` message option).
WHOLE = "*"


@dataclass(frozen=True, slots=True)
class SealedFor:
    """Where a sealed value may be opened: for ``actor``'s argument ``field``, or anywhere in ``run``."""

    actor: str | None = None
    field: str | None = None
    run: str | None = None

    def to_json(self) -> dict[str, str]:
        return {k: v for k, v in (("actor", self.actor), ("field", self.field), ("run", self.run)) if v is not None}

    @classmethod
    def from_json(cls, data: Any) -> SealedFor:
        """Raises Unsealable for anything but what :meth:`to_json` writes."""
        if not isinstance(data, dict) or not data or not all(isinstance(v, str) for v in data.values()):
            raise Unsealable("A sealed value says nothing valid about where it may be opened.")
        if set(data) not in ({"actor", "field"}, {"run"}):
            raise Unsealable("A sealed value says nothing valid about where it may be opened.")
        return cls(data.get("actor"), data.get("field"), data.get("run"))

    def allows(self, where: Opening, field: str | None) -> bool:
        if self.run is not None:
            return self.run == where.run
        return self.actor == where.actor and self.field == field


@dataclass(frozen=True, slots=True)
class Opening:
    """Where sealed values are being opened: the actor a message is for (None for the caller of a run or
    the framework itself) and the run it belongs to (None outside pipelines)."""

    actor: str | None = None
    run: str | None = None


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

    def seal(self, value: Any, sealed_for: SealedFor) -> dict[str, str]:
        """``value`` (JSON-able) as a sealed value that opens only where ``sealed_for`` says."""
        assert self._fernet is not None
        plain = orjson.dumps({_FOR: sealed_for.to_json(), _VALUE: value})
        return {SEALED_KEY: self._fernet.encrypt(plain).decode()}

    def open(self, value: Any, where: Opening) -> Any:
        """``value`` with every sealed value in it (at any depth) opened, each checked against ``where``.

        Raises:
            Unsealable: A sealed value does not authenticate, or was sealed for somewhere else.
        """
        return self._open(value, where, None)

    def open_sealed(self, value: Any, where: Opening) -> Any:
        """A value kept sealed as a whole (``{"$sealed": ...}``), opened one level: sealed values inside
        it stay sealed, for the actor they are meant for to open.

        Raises:
            Unsealable: As :meth:`open`, or ``value`` is not a sealed value.
        """
        if not _is_sealed(value):
            raise Unsealable("A value kept sealed is not a sealed value.")
        return self._unseal(value[SEALED_KEY], where, None)

    def _open(self, value: Any, where: Opening, field: str | None) -> Any:
        if isinstance(value, dict):
            if _is_sealed(value):
                return self._open(self._unseal(value[SEALED_KEY], where, field), where, field)
            return {key: self._open(item, where, key) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self._open(item, where, field) for item in value)
        return value

    def _unseal(self, token: Any, where: Opening, field: str | None) -> Any:
        plain = self._decrypt(token)
        if not isinstance(plain, dict) or set(plain) != {_FOR, _VALUE}:
            raise Unsealable(
                "A sealed value does not say where it may be opened: it was sealed by an older version of "
                "rabbit-pipelines, or not by it."
            )
        sealed_for = SealedFor.from_json(plain[_FOR])
        if not sealed_for.allows(where, field):
            target = f"run {where.run}" if sealed_for.run else f"argument {field!r} of actor {where.actor!r}"
            raise Unsealable(f"A sealed value was sealed for somewhere else, not for {target}; it was not opened.")
        return plain[_VALUE]

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
            whole = {"args": list(message.args), "kwargs": message.kwargs}
            sealed = self.seal(whole, SealedFor(actor.actor_name, WHOLE))[SEALED_KEY]
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
        name = actor.actor_name
        if actor.options.get(opt.ENCRYPT):
            return tuple(
                a if _is_sealed(a) else self.seal(a, SealedFor(name, positional(i))) for i, a in enumerate(args)
            ), {k: v if _is_sealed(v) else self.seal(v, SealedFor(name, k)) for k, v in kwargs.items()}
        fields: Sequence[str] = actor.options.get(opt.SECRET_FIELDS, ())
        if not fields:
            return tuple(args), kwargs
        return tuple(self._seal_fields(name, a, fields) if isinstance(a, dict) else a for a in args), self._seal_fields(
            name, kwargs, fields
        )

    def _seal_fields(self, actor: str, values: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
        return {
            k: self.seal(v, SealedFor(actor, k)) if k in fields and not _is_sealed(v) else v for k, v in values.items()
        }

    def open_message(
        self, message: dramatiq.broker.MessageProxy, run_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments the actor runs with (in run ``run_id``): the sealed option and every sealed value
        opened, each only if it was sealed for this actor and the field it is in, or for this run.

        Raises:
            Unsealable: Something sealed does not authenticate, or was sealed for somewhere else.
        """
        where = Opening(message.actor_name, run_id)
        args: Any = message.args
        kwargs: Any = message.kwargs
        sealed = message.options.get(opt.SEALED)
        if sealed is not None:
            whole = self._unseal(sealed, where, WHOLE)
            if not (isinstance(whole, dict) and isinstance(whole.get("args"), list)):
                raise Unsealable("A sealed argument list is not one.")
            args, kwargs = whole["args"], whole.get("kwargs")
            if not isinstance(kwargs, dict):
                raise Unsealable("A sealed argument list is not one.")
        opened_args = tuple(self._open(a, where, positional(i)) for i, a in enumerate(args))
        return opened_args, {k: self._open(v, where, k) for k, v in kwargs.items()}


def positional(index: int) -> str:
    """The field name of positional argument ``index`` (what an encrypting actor's arguments are sealed for)."""
    return f"args[{index}]"


def _is_sealed(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and SEALED_KEY in value


def has_sealed(value: Any) -> bool:
    """Whether ``value`` contains a sealed value at any depth (cheap check before opening)."""
    if isinstance(value, dict):
        return _is_sealed(value) or any(has_sealed(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_sealed(v) for v in value)
    return False
