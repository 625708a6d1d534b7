pipelines --app shop run sum_doubled --arg x=2 --arg y=3
