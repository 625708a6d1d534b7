"""The cluster harness: local RabbitMQ clusters, Redis Clusters and Sentinels in slots of their own,
and the failover load."""
