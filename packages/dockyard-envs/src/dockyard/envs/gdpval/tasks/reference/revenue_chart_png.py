import csv

from PIL import Image, ImageDraw

data = [("Jan", 120), ("Feb", 135), ("Mar", 128), ("Apr", 150), ("May", 171), ("Jun", 165)]
W, H = 800, 600
im = Image.new("RGB", (W, H), "white")
d = ImageDraw.Draw(im)
d.line((60, 40, 60, 540), fill="black")
d.line((60, 540, 760, 540), fill="black")
for i, (m, v) in enumerate(data):
    x0 = 90 + i * 110
    top = 540 - int(v / 180 * 480)
    d.rectangle((x0, top, x0 + 70, 540), fill=(40, 90, 170))
    d.text((x0 + 20, 550), m, fill="black")
    d.text((x0 + 20, top - 15), str(v), fill="black")
d.text((300, 10), "Monthly revenue (k)", fill="black")
im.save("revenue_chart.png")
with open("chart_data.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["month", "revenue"])
    w.writerows(data)
