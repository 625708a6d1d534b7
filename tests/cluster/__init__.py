"""Scale-out tests on a local RabbitMQ cluster and Redis Cluster.

A package, so that the clusters are package-scoped: started by the first test here, removed after the last.
"""
