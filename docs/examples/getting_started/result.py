import shop

shop.app.run("sum_doubled", x=2, y=3).result()  # 10
