import csv

scores = [("Ava", 91), ("Ben", 78), ("Cara", 85), ("Dev", 62), ("Eli", 55), ("Fay", 88)]


def letter(s):
    return "A" if s >= 90 else "B" if s >= 80 else "C" if s >= 70 else "D" if s >= 60 else "F"


with open("grades.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["student", "score", "grade"])
    for name, s in scores:
        w.writerow([name, s, letter(s)])
