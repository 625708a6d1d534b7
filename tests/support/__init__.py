"""What the tests share, imported by its qualified name: the backends of the two axes, fixtures' types,
housekeeping (namespaces, processes), the broker as witness, ports, tools; one package per suite below
(``faults``, ``cluster``, ``fail_closed``) for the actors, workers and harnesses its processes run."""
