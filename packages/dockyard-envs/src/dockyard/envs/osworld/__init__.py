"""OSWorld: computer-use tasks on a sandbox session's desktop (screenshots in, mouse and keyboard
out), OSWorld's task layout and evaluators, the shipped tasks and a toy family (toy.py)."""
