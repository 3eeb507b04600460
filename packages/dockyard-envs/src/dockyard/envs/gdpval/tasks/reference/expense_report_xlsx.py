from collections import defaultdict

from openpyxl import Workbook

rows = [
    ("2025-05-02", "Travel", 220.50),
    ("2025-05-06", "Meals", 48.20),
    ("2025-05-09", "Supplies", 130.00),
    ("2025-05-15", "Travel", 310.00),
    ("2025-05-21", "Meals", 61.30),
    ("2025-05-28", "Supplies", 19.99),
]
wb = Workbook()
ws = wb.worksheets[0]
ws.title = "Expenses"
ws.append(["Date", "Category", "Amount"])
tot = defaultdict(float)
for r in rows:
    ws.append(list(r))
    tot[r[1]] += r[2]
t = wb.create_sheet("Totals")
t.append(["Category", "Total"])
for c in sorted(tot):
    t.append([c, round(tot[c], 2)])
t.append(["All", round(sum(tot.values()), 2)])
wb.save("expenses.xlsx")
