module ratekeeper-example

go 1.19
