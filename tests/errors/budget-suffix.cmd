2 compile tests/errors/ok.ft --budget 40Q
