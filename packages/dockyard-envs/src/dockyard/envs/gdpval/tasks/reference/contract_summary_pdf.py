from fpdf import FPDF

lines = [
    "Parties: Acme Analytics LLC (provider) and Birch Foods Inc. (client)",
    "Term: 24 months from 1 July 2025",
    "Fee: USD 7,500 per month",
    "Termination: either party, with 60 days' written notice",
    "Governing law: the State of New York",
]
pdf = FPDF()
pdf.add_page()
pdf.set_font("Helvetica", "B", 15)
pdf.cell(0, 12, "Services agreement - summary", new_x="LMARGIN", new_y="NEXT")
pdf.set_font("Helvetica", size=11)
for ln in lines:
    pdf.multi_cell(0, 8, ln, new_x="LMARGIN", new_y="NEXT")
pdf.output("contract_summary.pdf")
