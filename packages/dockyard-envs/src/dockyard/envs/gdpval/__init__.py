"""GDPval-style deliverables: tasks that ask for files (CSV, XLSX, DOCX, PDF, PNG, Markdown),
made by a program (``gdpval``) or by an agent in a sandbox session (``gdpval_agentic``), graded
by deterministic checks and the LLM judge on a rubric."""
