from collections import defaultdict

from openpyxl import Workbook

rows = [
    ("Mia", "Apollo", 12),
    ("Mia", "Zephyr", 20),
    ("Noah", "Apollo", 30),
    ("Noah", "Zephyr", 6),
    ("Omar", "Zephyr", 38),
]
wb = Workbook()
ws = wb.worksheets[0]
ws.title = "Hours"
ws.append(["Person", "Project", "Hours"])
for r in rows:
    ws.append(list(r))
tot = defaultdict(int)
for _, p, h in rows:
    tot[p] += h
bp = wb.create_sheet("By project")
bp.append(["Project", "Hours"])
for p in sorted(tot):
    bp.append([p, tot[p]])
wb.save("timesheet.xlsx")
with open("status.md", "w") as f:
    f.write(f"""# Weekly status

## Summary

Apollo logged {tot["Apollo"]} hours and Zephyr {tot["Zephyr"]} hours this week.

## Risks

Omar carries most of Zephyr's load (38 hours): a single point of failure.
""")
