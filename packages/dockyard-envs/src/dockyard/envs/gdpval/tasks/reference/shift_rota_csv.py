import csv

days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
nurses = ["Alex", "Bea", "Cruz", "Dina"]
with open("rota.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["day", "morning", "evening", "night"])
    k = 0
    for d in days:
        w.writerow([d] + [nurses[(k + i) % 4] for i in range(3)])
        k += 3
