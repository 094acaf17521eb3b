2 generate none.plan --bytes
