# A settings form at fixed places: a name field, a checkbox, three radio buttons and Save,
# which writes settings.txt (one "key=value" per line).
wm title . "Settings"
wm geometry . 300x200+0+0
wm resizable . 0 0
set name ""
set notify 0
set size medium
label .ln -text "Name"
entry .name -textvariable name -width 16
checkbutton .notify -text "Enable notifications" -variable notify
radiobutton .small -text "Small" -variable size -value small
radiobutton .medium -text "Medium" -variable size -value medium
radiobutton .large -text "Large" -variable size -value large
button .save -text "Save" -command {
    set f [open /workspace/settings.txt w]
    puts $f "name=$name\nnotify=$notify\nsize=$size"
    close $f
}
place .ln -x 20 -y 20 -anchor w
place .name -x 80 -y 20 -anchor w
place .notify -x 20 -y 60 -anchor w
place .small -x 20 -y 100 -anchor w
place .medium -x 110 -y 100 -anchor w
place .large -x 210 -y 100 -anchor w
place .save -x 150 -y 160 -anchor center
