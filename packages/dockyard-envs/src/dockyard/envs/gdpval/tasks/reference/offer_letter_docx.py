import docx

d = docx.Document()
d.add_heading("Offer of employment", level=0)
d.add_paragraph("Dear Jordan Lee,")
d.add_paragraph("We are delighted to offer you a position at Northwind Ltd.")
d.add_heading("Position", level=1)
d.add_paragraph("Your role is Data Engineer, starting on 1 September 2025.")
d.add_heading("Compensation", level=1)
d.add_paragraph("Your annual salary is $85,000, with 25 days of paid leave per year.")
d.add_heading("Next Steps", level=1)
d.add_paragraph("Please return a signed copy of this letter by 15 August 2025.")
d.add_paragraph("Kind regards,\nPeople Team, Northwind Ltd")
d.save("offer_letter.docx")
