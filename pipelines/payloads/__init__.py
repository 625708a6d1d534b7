"""An actor's arguments: typed payloads with schema versions (``typed``) and sealed secrets
(``sealing``). The worker side is the ``Payloads`` middleware.
"""
