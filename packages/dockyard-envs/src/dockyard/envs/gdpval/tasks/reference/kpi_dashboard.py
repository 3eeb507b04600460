from openpyxl import Workbook
from PIL import Image, ImageDraw

steps = [("visitors", 18400), ("sign-ups", 736), ("paying customers", 92)]
wb = Workbook()
ws = wb.worksheets[0]
ws.title = "KPIs"
ws.append(["KPI", "Value", "Rate"])
prev = None
for name, v in steps:
    ws.append([name, v, None if prev is None else round(100 * v / prev, 1)])
    prev = v
wb.save("kpis.xlsx")
im = Image.new("RGB", (700, 450), "white")
d = ImageDraw.Draw(im)
for i, (name, v) in enumerate(steps):
    w = 600 - i * 180
    d.rectangle((350 - w // 2, 40 + i * 130, 350 + w // 2, 140 + i * 130), fill=(60, 140, 90))
    d.text((330, 85 + i * 130), f"{name}: {v:,}", fill="white")
im.save("funnel.png")
