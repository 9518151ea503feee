module verdict

go 1.26
