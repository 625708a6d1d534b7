"""Actor profiles: one option that picks an actor's queues, retries and guarantees together
(``kinds``). The worker side is the ``Profiles`` middleware.
"""
