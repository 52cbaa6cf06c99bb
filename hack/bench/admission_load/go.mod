module admissionload

go 1.26
