# Toy app: one text field; Enter writes its text to answer.txt.
# usage: wish entry.tcl TITLE WIDTH HEIGHT
lassign $argv title w h
wm title . $title
wm geometry . ${w}x${h}+0+0
wm resizable . 0 0
entry .e -width 14
place .e -relx 0.5 -rely 0.5 -anchor center
bind .e <Return> {
    set f [open /workspace/answer.txt w]
    puts -nonewline $f [.e get]
    close $f
}
focus -force .e
