from fpdf import FPDF

regions = [("North", 412000), ("South", 298500), ("East", 356250), ("West", 187750)]
pdf = FPDF()
pdf.add_page()
pdf.set_font("Helvetica", "B", 18)
pdf.cell(0, 12, "Q3 Sales Summary", new_x="LMARGIN", new_y="NEXT")
pdf.set_font("Helvetica", size=12)
for name, rev in regions:
    pdf.cell(0, 8, f"{name}: {rev:,}", new_x="LMARGIN", new_y="NEXT")
pdf.cell(0, 8, f"Total revenue: {sum(r for _, r in regions):,}", new_x="LMARGIN", new_y="NEXT")
best = max(regions, key=lambda r: r[1])[0]
pdf.multi_cell(0, 8, f"{best} was the strongest region this quarter.")
pdf.output("sales_summary.pdf")
