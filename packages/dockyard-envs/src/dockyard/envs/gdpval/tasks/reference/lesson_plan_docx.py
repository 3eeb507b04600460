import docx

d = docx.Document()
d.add_heading("Year 8 - the water cycle (45 minutes)", level=0)
d.add_heading("Objectives", level=1)
d.add_paragraph(
    "Describe evaporation, condensation, precipitation and collection in the water cycle."
)
d.add_heading("Materials", level=1)
d.add_paragraph("Kettle, cold tray, worksheet, diagram handout.")
d.add_heading("Activities", level=1)
t = d.add_table(rows=1, cols=2)
t.rows[0].cells[0].text, t.rows[0].cells[1].text = "Minutes", "Activity"
for m, a in (
    ("10", "Starter: what happens to a puddle?"),
    ("15", "Demonstration: kettle and cold tray"),
    ("15", "Label the diagram in pairs"),
    ("5", "Exit quiz"),
):
    c = t.add_row().cells
    c[0].text, c[1].text = m, a
d.add_heading("Assessment", level=1)
d.add_paragraph("Exit quiz: three questions on the stages of the water cycle.")
d.save("lesson_plan.docx")
