"""What happens to one delivery while a worker handles it: the record of what was decided about it
(``outcome``), putting it off (``deferral``), a guarding hook that fails (``guards``), and recording
what it did through a store stall (``recording``).
"""
