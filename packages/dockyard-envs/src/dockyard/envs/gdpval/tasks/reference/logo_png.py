from PIL import Image, ImageDraw

im = Image.new("RGB", (512, 512), "#FFF8EE")
d = ImageDraw.Draw(im)
d.ellipse((56, 56, 456, 456), fill="#D9822B")
d.text((236, 248), "C&C", fill="#FFFFFF")
im.save("logo.png")
with open("brand.md", "w") as f:
    f.write("""# Crumb & Co brand

## Palette

- #D9822B warm orange (the circle)
- #FFF8EE cream (background)
- #FFFFFF white (initials)

## Usage

Use the logo on cream or white backgrounds; keep clear space of a quarter of its width.
""")
