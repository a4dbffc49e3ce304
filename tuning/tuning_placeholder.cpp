namespace nimble::tuning {}
