from django.contrib import admin

from .models import Customer, Inquiry

admin.site.register(Customer)
admin.site.register(Inquiry)
