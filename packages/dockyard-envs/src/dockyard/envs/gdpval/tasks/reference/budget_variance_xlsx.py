from openpyxl import Workbook

rows = [
    ("Rent", 2400, 2400),
    ("Salaries", 18000, 18750),
    ("Marketing", 3000, 2450),
    ("Software", 1200, 1390),
    ("Travel", 800, 310),
]
wb = Workbook()
ws = wb.worksheets[0]
ws.title = "Variance"
ws.append(["Category", "Planned", "Actual", "Variance", "Status"])
for c, p, a in rows:
    ws.append([c, p, a, a - p, "Over" if a - p > 0 else "OK"])
tp, ta = sum(r[1] for r in rows), sum(r[2] for r in rows)
ws.append(["Total", tp, ta, ta - tp, "Over" if ta - tp > 0 else "OK"])
wb.save("budget.xlsx")
