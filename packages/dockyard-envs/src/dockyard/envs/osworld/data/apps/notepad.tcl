# A small text editor: edits FILE (relative to /workspace); Ctrl+S saves it and the title
# becomes "FILE - saved"; Ctrl+A selects all.
# usage: wish notepad.tcl FILE
set file [lindex $argv 0]
wm title . "$file - notepad"
wm geometry . 360x220+0+0
text .t -width 40 -height 10 -undo 1
pack .t -fill both -expand 1
if {[file exists /workspace/$file]} {
    set f [open /workspace/$file r]
    .t insert end [read -nonewline $f]
    close $f
    .t mark set insert 1.0
}
proc save {} {
    global file
    set f [open /workspace/$file w]
    puts -nonewline $f [.t get 1.0 end-1c]
    close $f
    wm title . "$file - saved"
}
bind .t <Control-s> {save; break}
bind .t <Control-a> {.t tag add sel 1.0 end; break}
focus -force .t
