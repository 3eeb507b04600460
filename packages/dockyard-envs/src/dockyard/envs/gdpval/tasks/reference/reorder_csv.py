import csv

stock = [
    ("A-100", 14, 20, 60),
    ("A-200", 75, 30, 90),
    ("B-310", 5, 15, 40),
    ("C-020", 30, 30, 80),
    ("D-555", 0, 10, 25),
]
with open("reorder.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["sku", "on_hand", "reorder_point", "order_qty"])
    for sku, on, rp, target in stock:
        if on < rp:
            w.writerow([sku, on, rp, target - on])
