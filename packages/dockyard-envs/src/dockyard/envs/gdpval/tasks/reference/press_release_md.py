with open("press_release.md", "w") as f:
    f.write("""# Helio Robotics opens its first European office in Lyon

## Announcement

Helio Robotics will open its first European office in Lyon on 12 May 2025, creating 40 jobs in
engineering, sales and support.

## Quote

"Lyon gives us the engineering talent and the customers we need to grow in Europe," said
Marta Silva, CEO of Helio Robotics.

## About Helio Robotics

Helio Robotics builds autonomous inspection robots for energy infrastructure.

Media contact: press@helio.example
""")
