"""How the run store sends its Lua scripts to Redis: calls of threads made at the same time sent
together on one thread's own connection (:mod:`pipelines.store.thread_clients` says why not the pool),
pipelines that go by SHA, the script's text where a shard may not have it, and ``WAIT`` for replicas
after durable writes (sent by :mod:`pipelines.store.waited_sends`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from importlib import resources
from typing import Any, cast

import hiredis
import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

from pipelines.store.group_commit import GroupCommit, NotDone
from pipelines.store.replica_wait import ReplicaWait
from pipelines.store.thread_clients import ThreadClients
from pipelines.store.waited_sends import reply_or_error, send_waiting, send_waiting_per_primary


class _Failed:
    """A script's error in a shared send, raised in the thread whose call it was."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class Scripts:
    """The store's scripts on ``client`` (a Redis Cluster's where ``cluster``); ``thread_clients``, when
    given, carry the single calls; ``replica_wait``, when given, follows every call made ``replicated``."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        *,
        cluster: bool,
        thread_clients: ThreadClients | None,
        replica_wait: ReplicaWait | None = None,
    ) -> None:
        self._client = client
        self._cluster = cluster
        self._thread_clients = thread_clients
        self._wait = replica_wait
        self._registered: list[Script] = []
        self._together = GroupCommit(self._run_together) if thread_clients is not None else None
        self._pipelines = GroupCommit(self._execute_together) if thread_clients is not None else None

    def register(self, name: str) -> Script:
        """The script ``lua/<name>.lua`` of this package."""
        text = resources.files("pipelines.store").joinpath("lua", f"{name}.lua").read_bytes()
        script = Script(self._client, text)  # bytes: its SHA needs no encoder, so no connected client
        self._registered.append(script)
        return script

    @property
    def waits_per_node(self) -> bool:
        """Replicated calls go to each cluster node directly (see :meth:`run_many`)."""
        return self._cluster and self._wait is not None

    def run(self, script: Script, keys: list[str], args: list[Any], *, replicated: bool = False) -> Any:
        """``script``'s raw reply. Calls that threads make at the same time go to Redis together, in one
        pipeline on the connection of the thread that sends them (group commit); each thread gets its
        own reply, or its own script's error. A ``replicated`` call is followed by ``WAIT`` where the
        store waits for replicas."""
        wait = self._wait if replicated else None
        if self._together is None:
            if wait is not None:
                return self.run_many(script, [(keys, args)], replicated=True)[0]
            return script(keys=keys, args=args, client=self._own_client())
        reply = self._together.submit((script, keys, args, wait is not None))
        if isinstance(reply, NotDone):  # the shared send failed in another thread: this call alone
            own = self._own_client()
            if wait is not None and own is not None:
                return _raised(send_waiting(wait, own, script, [(keys, args)]))[0]
            return script(keys=keys, args=args, client=own)
        if isinstance(reply, _Failed):
            raise reply.error
        return reply

    def run_many(
        self, script: Script, calls: Sequence[tuple[list[str], list[Any]]], *, replicated: bool = False
    ) -> list[Any]:
        """The raw replies of ``script`` called with each of ``calls``, in one round trip per Redis server,
        each followed by ``WAIT`` where ``replicated`` and the store waits; the first error reply raised."""
        wait = self._wait
        if not replicated or wait is None:

            def fill(pipe: Any) -> None:
                for keys, args in calls:
                    self.queue(pipe, script, keys, args)

            return self.execute(fill)
        if self._cluster:
            return _raised(send_waiting_per_primary(wait, cast(RedisCluster, self._client), script, calls))
        return _raised(send_waiting(wait, self._own_client() or cast(redis.Redis, self._client), script, calls))

    def _own_client(self) -> redis.Redis | None:
        """This thread's connection, or None (the registered client) where threads share a pool."""
        return self._thread_clients.get() if self._thread_clients is not None else None

    def _run_together(self, calls: Sequence[tuple[Script, list[str], list[Any], bool]]) -> list[Any]:
        client = self._own_client()
        assert client is not None  # combined only where threads have their own connections
        waited = sum(waits for *_, waits in calls)
        # Alone too: a raw send costs a fraction of redis-py's own command path (see _send).
        pipe: Any = client.pipeline(transaction=False)
        for script, keys, args, _ in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        wait = self._wait if waited else None
        if wait is not None:
            pipe.execute_command(*wait.command)  # after them all, on the connection that wrote
        replies = _send(client, pipe.command_stack)
        acknowledged = replies.pop() if wait is not None else None
        ran_again = False
        for index, reply in enumerate(replies):
            if isinstance(reply, redis.exceptions.NoScriptError):  # Redis restarted: it did not run
                script, keys, args, _ = calls[index]
                ran_again = True
                try:
                    replies[index] = script(keys=keys, args=args, client=client)  # loads it, then runs it
                except redis.exceptions.ResponseError as e:
                    replies[index] = _Failed(e)
            elif isinstance(reply, redis.exceptions.ResponseError):
                replies[index] = _Failed(reply)
        if wait is not None:
            if ran_again:  # those writes came after the WAIT: wait for them too
                acknowledged = reply_or_error(partial(cast(Any, client).execute_command, *wait.command))
            wait.acknowledged(acknowledged, waited)
        return replies

    def queue(self, pipe: Any, script: Script, keys: list[str], args: list[Any]) -> None:
        """Queue ``script`` in ``pipe``. A cluster pipeline sends the script's text: each shard may not
        have it cached (a replica promoted after a failover starts with none), and it cannot load it.
        Otherwise the script goes by its SHA (see :meth:`execute`)."""
        if self._cluster:
            pipe.execute_command("EVAL", script.script, len(keys), *keys, *args)
        else:
            pipe.evalsha(script.sha, len(keys), *keys, *args)

    def execute(self, fill: Callable[[Any], None], *, replicated: bool = False) -> list[Any]:
        """Fill a pipeline (no transaction) and send it in one round trip; the replies of what ``fill``
        queued. Pipelines that threads send at the same time go as one, on the sending thread's own
        connection (group commit), and each thread gets its own replies or its own first error. A
        ``replicated`` pipeline is followed by ``WAIT`` where the store waits for replicas, except on a
        Redis Cluster, whose pipelines spread over several connections (use :meth:`run_many`).

        redis-py's own script pipelines ask Redis whether their scripts are cached before every send (a
        round trip more each time); here scripts go by SHA and, only when Redis has lost them (it
        restarted), are loaded and the pipeline sent again. NOSCRIPT fails every script call of the
        pipeline, so no script ran twice; what else it holds must write idempotently (index entries, TTLs).
        """
        waits = replicated and self._wait is not None and not self._cluster
        if self._pipelines is None:
            return self._execute_alone(fill, self._client, waits)
        replies = self._pipelines.submit((fill, waits))
        if isinstance(replies, NotDone):  # the shared send failed in another thread: this pipeline alone
            return self._execute_alone(fill, self._own_client() or self._client, waits)
        if isinstance(replies, _Failed):
            raise replies.error
        return replies

    def _execute_alone(
        self, fill: Callable[[Any], None], client: redis.Redis | RedisCluster, waits: bool = False
    ) -> list[Any]:
        wait = self._wait if waits else None
        for attempt in (1, 2):
            pipe: Any = client.pipeline(transaction=False)
            fill(pipe)
            if wait is not None:
                pipe.execute_command(*wait.command)
            try:
                replies = cast(list[Any], pipe.execute())
            except redis.exceptions.NoScriptError:
                if attempt == 2:
                    raise
                self._load_scripts()
                continue
            if wait is not None:
                wait.acknowledged(replies.pop())
            return replies
        raise AssertionError("unreachable")

    def _execute_together(self, fills: Sequence[tuple[Callable[[Any], None], bool]]) -> list[list[Any] | _Failed]:
        client = self._own_client()
        assert client is not None  # combined only where threads have their own connections
        waited = sum(waits for _, waits in fills)
        for attempt in (1, 2):
            pipe: Any = client.pipeline(transaction=False)
            spans: list[tuple[int, int] | _Failed] = []
            for fill, _ in fills:
                start = len(pipe.command_stack)
                try:
                    fill(pipe)
                except Exception as e:  # that caller's own error: the others' pipelines still go
                    del pipe.command_stack[start:]
                    spans.append(_Failed(e))
                    continue
                spans.append((start, len(pipe.command_stack)))
            wait = self._wait if waited and pipe.command_stack else None
            if wait is not None:
                pipe.execute_command(*wait.command)  # after them all, on the connection that wrote
            replies = _send(client, pipe.command_stack) if pipe.command_stack else []
            if attempt == 1 and any(isinstance(reply, redis.exceptions.NoScriptError) for reply in replies):
                self._load_scripts()  # no script of the pipeline ran: send it all again
                continue
            if wait is not None:
                wait.acknowledged(replies.pop(), waited)
            return [span if isinstance(span, _Failed) else _own_replies(replies[span[0] : span[1]]) for span in spans]
        raise AssertionError("unreachable")

    def _load_scripts(self) -> None:
        for script in self._registered:
            self._client.script_load(script.script)


def _send(client: redis.Redis, stack: Sequence[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
    """The replies of a pipeline's queued commands (each error reply as its exception), sent in one write
    on ``client``'s own connection and retried on a new one after a connection error, as redis-py's
    ``Pipeline.execute(raise_on_error=False)`` does. Without the pipeline's pool, statistics and reply
    callbacks (replies come back raw: the store reads only its scripts', which have none), it costs a
    third of the CPU.
    """
    connection: Any = client.connection  # a thread's single-connection client: always there
    commands = [args for args, _ in stack]

    def attempt() -> list[Any]:
        connection.send_packed_command([b"".join(map(hiredis.pack_command, commands))])
        replies: list[Any] = []
        for _ in commands:  # every reply is read, so that the connection stays in step
            try:
                replies.append(connection.read_response())
            except redis.exceptions.ResponseError as e:
                replies.append(e)
        return replies

    replies: list[Any] = connection.retry.call_with_retry(attempt, lambda _error: connection.disconnect())
    return replies


def _raised(replies: list[Any]) -> list[Any]:
    """``replies``, or the first error among them raised."""
    error = next((reply for reply in replies if isinstance(reply, Exception)), None)
    if error is not None:
        raise error
    return replies


def _own_replies(replies: list[Any]) -> list[Any] | _Failed:
    """A caller's replies, or its first error (as ``pipe.execute()`` alone would raise it)."""
    error = next((reply for reply in replies if isinstance(reply, Exception)), None)
    return _Failed(error) if error is not None else replies
