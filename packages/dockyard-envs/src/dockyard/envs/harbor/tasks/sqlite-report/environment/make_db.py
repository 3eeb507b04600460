import random
import sqlite3

random.seed(11)
db = sqlite3.connect("shop.db")
db.executescript(
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount REAL);"
)
names = ["Ada", "Brian", "Chen", "Dana", "Eve", "Farid", "Grace", "Hiro"]
db.executemany("INSERT INTO customers VALUES (?, ?)", list(enumerate(names, 1)))
rows = [(None, random.randint(1, 8), round(random.uniform(5, 250), 2)) for _ in range(300)]
db.executemany("INSERT INTO orders VALUES (?, ?, ?)", rows)
db.commit()
