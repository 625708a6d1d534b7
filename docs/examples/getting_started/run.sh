dramatiq shop                                          # a worker (the stock Dramatiq CLI)
pipelines run sum_doubled --arg x=2 --arg y=3 --wait   # another shell: prints the run id, then its status
