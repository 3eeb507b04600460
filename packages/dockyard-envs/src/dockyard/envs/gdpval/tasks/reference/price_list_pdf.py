from fpdf import FPDF

items = [
    ("Desk Lamp", 40.00),
    ("Office Chair", 180.00),
    ("Notebook (pack of 5)", 12.00),
    ("Monitor Stand", 55.00),
]
pdf = FPDF()
pdf.add_page()
pdf.set_font("Helvetica", "B", 16)
pdf.cell(0, 12, "Spring Price List", new_x="LMARGIN", new_y="NEXT")
pdf.set_font("Helvetica", size=12)
for name, price in items:
    pdf.cell(0, 8, f"{name}: {price * 0.85:.2f}", new_x="LMARGIN", new_y="NEXT")
pdf.output("price_list.pdf")
