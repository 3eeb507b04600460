import docx

d = docx.Document()
d.add_heading("Incident report: forklift collision", level=0)
d.add_heading("Summary", level=1)
d.add_paragraph("A forklift struck a storage rack in Warehouse B on 3 April 2025. Nobody was hurt.")
d.add_heading("Timeline", level=1)
d.add_paragraph(
    "10:40 - collision at the aisle corner; 10:45 - area closed; 11:30 - rack inspected."
)
d.add_heading("Root Cause", level=1)
d.add_paragraph("The sightline at the aisle corner was blocked by stacked pallets.")
d.add_heading("Corrective Actions", level=1)
d.add_paragraph("Install a convex mirror at the corner by 10 April.", style="List Bullet")
d.add_paragraph("Retrain all forklift drivers by 30 April.", style="List Bullet")
d.save("incident_report.docx")
