"""What travels on a message, parsed in one place each: the JSON codec (``codec``), the step address
a pipeline step carries (``steps``), the options' values (``option_values``, ``rates``), the names of
queues, exchanges and keys (``naming``), the topology they form (``topology``), how a message finds its
queues (``routing``) and a shared body its actor's arguments (``shared_bodies``), and the trace context
(``trace_context``).

Nothing here imports the composition, the app, the store or the broker: they all import this.
"""
