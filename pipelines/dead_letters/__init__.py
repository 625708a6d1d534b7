"""Dead letters: why a message died (``reasons``, carried in the letter's headers) and the dead-letter
queues of a namespace, listed, replayed and purged (``queues``). Each broker keeps its letters in its
own way (``pipelines.broker``).
"""
