2 compile tests/errors/ok.ft --budgett 40G
