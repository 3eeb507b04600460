FENCE = "`" * 3  # (a literal fence would end the answer's own code block)
TEXT = f"""# csvtidy

Clean messy CSV files from the command line.

## Installation

{FENCE}
pip install csvtidy
{FENCE}

## Usage

{FENCE}
csvtidy input.csv -o clean.csv
{FENCE}

## Features

- trims whitespace around every field
- removes duplicate rows
- normalises dates to ISO 8601 (YYYY-MM-DD)

## License

MIT
"""
with open("README.md", "w") as f:
    f.write(TEXT)
