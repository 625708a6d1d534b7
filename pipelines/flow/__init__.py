"""A run from start to end: a pipeline compiled into its plan (``plan``, ``compiled_plans``), the
messages of its first steps (``step_messages``, ``stored_runs``), the runtime that advances it when a
step ends (``runtime``), and what ends it otherwise: its deadline (``deadlines``) or the sweep for runs
nothing advances (``stall_sweep``). ``run_query`` reads the searches callers write.
"""
