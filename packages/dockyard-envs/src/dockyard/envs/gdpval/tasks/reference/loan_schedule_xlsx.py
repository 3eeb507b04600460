from openpyxl import Workbook

P, r, n = 12000.0, 0.005, 12
pay = round(P * r / (1 - (1 + r) ** -n), 2)
wb = Workbook()
ws = wb.worksheets[0]
ws.title = "Schedule"
ws.append(["Month", "Payment", "Interest", "Principal", "Balance"])
bal = P
for m in range(1, n + 1):
    interest = round(bal * r, 2)
    p = pay if m < n else round(bal + interest, 2)
    principal = round(p - interest, 2)
    bal = round(bal - principal, 2)
    ws.append([m, p, interest, principal, bal])
wb.save("loan_schedule.xlsx")
