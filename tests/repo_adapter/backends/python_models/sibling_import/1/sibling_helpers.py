def triple(array):
    return array * 3
