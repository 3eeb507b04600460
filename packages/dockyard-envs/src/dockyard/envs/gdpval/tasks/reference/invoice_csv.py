import csv

items = [("Widget", 4, 6.25), ("Gadget", 2, 19.99), ("Cable", 10, 1.50), ("Toolkit", 1, 45.00)]
with open("invoice_lines.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["item", "quantity", "unit_price", "line_total"])
    total = 0.0
    for name, q, p in items:
        line = round(q * p, 2)
        total += line
        w.writerow([name, q, f"{p:.2f}", f"{line:.2f}"])
    w.writerow(["TOTAL", "", "", f"{total:.2f}"])
