import docx

d = docx.Document()
d.add_heading("Product steering meeting - 14 March 2025", level=0)
d.add_heading("Attendees", level=1)
for name in ("Priya Nair (chair)", "Tom Okafor", "Lena Berg"):
    d.add_paragraph(name, style="List Bullet")
d.add_heading("Decisions", level=1)
d.add_paragraph("The launch moves to 2 June.", style="List Bullet")
d.add_paragraph("The beta stays invite-only.", style="List Bullet")
d.add_heading("Action Items", level=1)
t = d.add_table(rows=1, cols=3)
for cell, text in zip(t.rows[0].cells, ("Owner", "Task", "Due"), strict=False):
    cell.text = text
for row in (
    ("Tom Okafor", "Update the launch plan", "21 March"),
    ("Lena Berg", "Draft the beta FAQ", "28 March"),
):
    cells = t.add_row().cells
    for cell, text in zip(cells, row, strict=False):
        cell.text = text
d.save("minutes.docx")
