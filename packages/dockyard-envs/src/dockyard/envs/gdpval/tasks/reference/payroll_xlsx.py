from openpyxl import Workbook

staff = [("Ana", 40, 30.00), ("Ben", 45, 22.00), ("Chloe", 32, 41.50)]
wb = Workbook()
ws = wb.worksheets[0]
ws.title = "Payroll"
ws.append(["Employee", "Hours", "Rate", "Gross"])
total = 0.0
for name, h, r in staff:
    gross = min(h, 40) * r + max(h - 40, 0) * r * 1.5
    total += gross
    ws.append([name, h, r, round(gross, 2)])
s = wb.create_sheet("Summary")
s.append(["Metric", "Value"])
s.append(["Total gross", round(total, 2)])
s.append(["Employees", len(staff)])
wb.save("payroll.xlsx")
