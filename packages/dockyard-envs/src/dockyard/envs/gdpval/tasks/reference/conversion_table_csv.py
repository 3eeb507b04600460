import csv

with open("temperatures.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["celsius", "fahrenheit", "kelvin"])
    for c in range(0, 101, 10):
        w.writerow([c, round(c * 9 / 5 + 32, 2), round(c + 273.15, 2)])
